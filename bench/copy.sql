COPY copy_t FROM :'copy_file';
